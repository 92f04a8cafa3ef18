"""The DSPy signature of one step of the LLM graph walk: is this operation where the information was lost?

Its output field names are also how the simulated world recognises the request. Declarations only.
"""

from __future__ import annotations

import dspy

ERROR_CHOICES = ("ExtractionError", "UpdateError", "DeletionError", "RetrievalError", "ResponseError", "none")


class JudgeOperation(dspy.Signature):
    """You audit one operation of a memory system that failed to answer a question. The information the
    answer needs came from the conversation turns shown as `needed_information`. Look at what the
    operation read (`operation_inputs`), what it wrote (`operation_outputs`) and its instructions
    (`operation_prompt`). Decide whether this operation kept the needed information that its inputs held.
    If it lost, dropped, overwrote, deleted, failed to retrieve, or (for the answer step) failed to use it,
    answer kept_information = False and name the error type: ExtractionError (never made it into memory),
    UpdateError (a later update degraded or overwrote it), DeletionError (a unit holding it was deleted),
    RetrievalError (in the store but not in the retrieved context), ResponseError (in the context, yet the
    answer is wrong). If the operation kept it (or its inputs never held it), answer kept_information =
    True and error_type = none. Give a short reason that quotes what was lost."""

    question: str = dspy.InputField()
    gold_answer: str = dspy.InputField()
    needed_information: str = dspy.InputField(desc="the evidence turns the answer needs")
    operation: str = dspy.InputField(desc="name, stage and kind of the operation")
    operation_inputs: str = dspy.InputField(desc="the variables it read (clipped)")
    operation_outputs: str = dspy.InputField(desc="the variables it wrote (clipped)")
    operation_prompt: str = dspy.InputField(desc="the instruction it ran with (clipped), or 'none'")
    kept_information: bool = dspy.OutputField()
    error_type: str = dspy.OutputField(desc="one of: " + ", ".join(ERROR_CHOICES))
    reason: str = dspy.OutputField()
