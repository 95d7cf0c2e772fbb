"""`oomguard simulate` and `oomguard step`: vLLM's V1 scheduler over a traffic trace, and the memory of each
step."""
