"""The Mem0-style memory system."""
