"""The Live tab's help texts, in plain words: what a control does and what it costs, never the
name of the module that does it (the README and the docstrings say that)."""

GAMMA = "γ: draft tokens per step"
GAMMA_INFO = "the target checks them all in one pass"
POLICY = "Depth policy"
FAST_PATH = "Fast path"
FAST_PATH_INFO = {
    "cpu": ("Llama-family pairs run on a leaner decoder with the memory for past tokens set "
            "aside up front: the same arithmetic and tokens, less time between passes"),
    "cuda": ("each pass size is recorded once as a CUDA graph, then replayed: the same tokens, "
             "less launch time; the first pass of each size takes tens of seconds"),
    "mps": "memory for past tokens set aside up front: the same tokens, a little less overhead",
}
PATH_CHOICES = [("auto: on where it measures faster", "auto"), ("on", "on"), ("off", "off")]
DRAFT_INT8 = "Smaller draft weights (8-bit, CPU, with the fast path)"
DRAFT_INT8_INFO = ("the draft reads a quarter of the bytes per pass: a cheaper, slightly different "
                   "guesser; the output is still exactly what the target alone would write")
BASELINE = "Also run plain decoding (target alone) to measure the speed-up"
DEVICE_INFO = "auto: the GPU when there is one, else the CPU"
DRAFTER = "Who drafts"
DRAFTER_CHOICES = [("the draft model", "model"), ("copy from the prompt (n-gram lookup)", "ngram")]
PROMPT_AS = "Prompt as"
PROMPT_MODES = [("auto: a question for a chat model, else text to continue", "auto"),
                ("chat: a question; the model writes the answer", "chat"),
                ("continue: text the model carries on", "continue")]
START = "Press **Run** to decode."


def fast_path_info(devices: list[str]) -> str:
    """The fast path's help for the best device this machine offers."""
    best = next((d for d in ("cuda", "mps") if d in devices), "cpu")
    return FAST_PATH_INFO[best]
