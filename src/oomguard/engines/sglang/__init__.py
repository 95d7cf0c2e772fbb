"""How SGLang accounts GPU memory: the same contract as engines/vllm (flags -> config -> accounting ->
pool)."""
