"""The small built-in word lists the simulated world draws from.

Every list is a tuple in a fixed order, so that `random.Random(seed)` choices over them are
reproducible. Proper nouns are single capitalised words or capitalised word groups without
abbreviation dots (the stand-in splits sentences at `. `). Closed classes (activities, relations,
animals, hobbies, preference items) are also what the stand-in's regexes alternate over.
This module holds data only.
"""

from __future__ import annotations

from typing import NamedTuple

FIRST_NAMES: tuple[str, ...] = (
    "Alice",
    "Bruno",
    "Chloe",
    "Diego",
    "Elena",
    "Farid",
    "Grace",
    "Hiro",
    "Imani",
    "Jonas",
    "Keira",
    "Liam",
    "Maya",
    "Nikhil",
    "Olga",
    "Pablo",
    "Quinn",
    "Rosa",
    "Samir",
    "Tessa",
    "Umar",
    "Vera",
    "Wes",
    "Ximena",
    "Yusuf",
    "Zoe",
    "Aaron",
    "Bianca",
    "Carlos",
    "Dana",
    "Emil",
    "Fiona",
    "Gustav",
    "Hana",
    "Ivan",
    "Julia",
    "Kofi",
    "Lena",
    "Marco",
    "Nora",
    "Oscar",
    "Priya",
    "Rafael",
    "Sofia",
    "Theo",
    "Uma",
    "Victor",
    "Wanda",
    "Yara",
    "Zane",
)

CITIES: tuple[str, ...] = (
    "Boston",
    "Denver",
    "Austin",
    "Seattle",
    "Chicago",
    "Portland",
    "Atlanta",
    "Phoenix",
    "Nashville",
    "Miami",
    "Toronto",
    "Vancouver",
    "Dublin",
    "Lisbon",
    "Berlin",
    "Madrid",
    "Melbourne",
    "Osaka",
    "Oslo",
    "Prague",
    "San Diego",
    "Minneapolis",
    "Pittsburgh",
    "Raleigh",
    "Sacramento",
    "Tucson",
    "Boise",
    "Halifax",
    "Montreal",
    "Edinburgh",
    "Amsterdam",
    "Vienna",
    "Copenhagen",
    "Kyoto",
    "Auckland",
    "Santiago",
)

HOMETOWNS: tuple[str, ...] = (
    "Ohio",
    "Vermont",
    "Kansas",
    "Oregon",
    "Maine",
    "Texas",
    "Iowa",
    "Montana",
    "Georgia",
    "Nebraska",
    "Arizona",
    "Kentucky",
    "Wisconsin",
    "Idaho",
    "Alabama",
    "Michigan",
)

COMPANIES: tuple[str, ...] = (
    "Northwind",
    "Globex",
    "Initech",
    "Umbrella Labs",
    "Vandelay Industries",
    "Hooli",
    "Stark Logistics",
    "Acme Foods",
    "Wayne Media",
    "Cyberdyne",
    "Soylent Health",
    "Pied Piper",
    "Blue Harbor Bank",
    "Tidewater Energy",
    "Greenleaf Studios",
    "Summit Analytics",
)

JOBS: tuple[str, ...] = (
    "nurse",
    "chef",
    "teacher",
    "architect",
    "pilot",
    "lawyer",
    "dentist",
    "carpenter",
    "journalist",
    "pharmacist",
    "firefighter",
    "librarian",
    "accountant",
    "photographer",
    "veterinarian",
    "electrician",
)


class Activity(NamedTuple):
    """A dated event: `base` is used in questions, `past` in statements, `places` after `prep`."""

    base: str
    past: str
    prep: str
    places: tuple[str, ...]


_MOUNTAINS = ("Mount Rainier", "Mount Hood", "Pikes Peak", "Mount Washington", "Mount Shasta")
_PARKS = ("Yosemite", "Zion", "Acadia", "Big Sur", "Glacier Point", "Joshua Tree")
_LAKES = ("Lake Tahoe", "Lake Placid", "Crater Lake", "Lake Geneva", "Flathead Lake")
_VENUES = ("the Blue Note", "Red Rocks", "the Fillmore", "the Greek Theatre", "the Ryman")
_SPOTS = ("the animal shelter", "the food bank", "the community garden", "the public library")
_STUDIOS = ("a local bakery", "the community college", "a friend's restaurant", "the art center")

ACTIVITIES: tuple[Activity, ...] = (
    Activity("go hiking", "went hiking", "at", _MOUNTAINS),
    Activity("go camping", "went camping", "at", _PARKS),
    Activity("go kayaking", "went kayaking", "on", _LAKES),
    Activity("run a half marathon", "ran a half marathon", "in", CITIES),
    Activity("see a live concert", "saw a live concert", "at", _VENUES),
    Activity("volunteer", "volunteered", "at", _SPOTS),
    Activity("take a cooking class", "took a cooking class", "at", _STUDIOS),
    Activity("attend a wedding", "attended a wedding", "in", CITIES),
    Activity("go skiing", "went skiing", "at", ("Aspen", "Whistler", "Vail", "Park City", "Jackson Hole")),
    Activity("visit an art museum", "visited an art museum", "in", CITIES),
    Activity("go to a job interview", "went to a job interview", "at", COMPANIES),
    Activity("go sailing", "went sailing", "on", _LAKES),
)

RELATIONS: tuple[str, ...] = (
    "sister",
    "brother",
    "cousin",
    "best friend",
    "coworker",
    "neighbor",
    "aunt",
    "uncle",
    "roommate",
)

HOBBIES: tuple[str, ...] = (
    "pottery",
    "rock climbing",
    "painting",
    "gardening",
    "chess",
    "knitting",
    "photography",
    "salsa dancing",
    "birdwatching",
    "woodworking",
    "surfing",
    "baking",
)

ANIMALS: tuple[str, ...] = ("cat", "dog", "parrot", "rabbit", "hamster", "turtle")

PET_NAMES: tuple[str, ...] = (
    "Luna",
    "Max",
    "Biscuit",
    "Pepper",
    "Mochi",
    "Ziggy",
    "Olive",
    "Rocco",
    "Pickles",
    "Nugget",
)


class PrefItem(NamedTuple):
    """A preference: the `thing` liked or disliked, its `category`, and an `occasion` phrase for
    open-domain questions that shares the `keyword` with the thing."""

    thing: str
    category: str
    keyword: str
    occasion: str


PREFS: tuple[PrefItem, ...] = (
    PrefItem("jazz music", "music", "jazz", "a night at a jazz club"),
    PrefItem("country music", "music", "country", "a country music festival"),
    PrefItem("Thai food", "food", "Thai", "dinner at a new Thai restaurant"),
    PrefItem("sushi", "food", "sushi", "an all-you-can-eat sushi buffet"),
    PrefItem("horror movies", "movies", "horror", "a horror movie marathon"),
    PrefItem("documentaries", "movies", "documentary", "a documentary film festival"),
    PrefItem("basketball", "sports", "basketball", "courtside tickets to a basketball game"),
    PrefItem("soccer", "sports", "soccer", "watching a soccer match at a pub"),
    PrefItem("mystery novels", "books", "mystery", "a mystery book club"),
    PrefItem("poetry", "books", "poetry", "an open mic poetry night"),
    PrefItem("craft beer", "drinks", "beer", "a craft beer tasting"),
    PrefItem("spicy food", "spice", "spicy", "a spicy food challenge"),
    PrefItem("crowded places", "crowds", "crowded", "a crowded street festival"),
    PrefItem("early mornings", "mornings", "early", "an early morning yoga class"),
)

# Small talk: sentences that carry no fact. `{other}` is the listener's name.
SMALL_TALK: tuple[str, ...] = (
    "Hey {other}, how have you been?",
    "It's been a while since we caught up.",
    "The weather has been so strange this week.",
    "I've been binge-watching a show lately, it's so good.",
    "Honestly, this week flew by.",
    "That sounds really nice!",
    "Haha, I know what you mean.",
    "I've been trying to drink more water.",
    "Work has been pretty hectic, but it's fine.",
    "Do you have any plans for the weekend?",
    "I slept in this morning and it felt great.",
    "My coffee this morning was way too strong.",
    "Wow, that's awesome, {other}!",
    "I'm so happy for you.",
    "That must have been exhausting.",
    "I totally get that.",
    "We should grab lunch sometime.",
    "I read an interesting article about sleep the other day.",
    "Traffic was terrible on the way home.",
    "I can't believe how fast this year is going.",
    "Thanks for asking, {other}.",
    "That's so cool, tell me more.",
    "Good luck with everything!",
    "I've been meaning to reorganize my closet.",
    "It rained all afternoon here.",
    "Same here, honestly.",
    "I need a vacation soon.",
    "Talk to you soon, {other}!",
    "Oh no, I hope it gets better.",
    "I tried a new recipe for dinner, it was okay.",
)

# Sentences that may open a fact turn.
OPENERS: tuple[str, ...] = (
    "Oh, by the way.",
    "Guess what.",
    "So, some news.",
    "Okay, random update.",
    "You won't believe this.",
)

REACTIONS: tuple[str, ...] = (
    "Wow, that's awesome, {other}!",
    "That sounds amazing!",
    "Oh nice, I had no idea.",
    "That's so cool, tell me more.",
    "Good for you, {other}!",
    "Haha, I love that.",
    "That's a big deal!",
)
