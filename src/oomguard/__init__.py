"""oomguard: will this LLM deployment run out of memory, why did it, and is it about to?"""

__version__ = "0.1.0"
