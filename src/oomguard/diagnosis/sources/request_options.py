"""Request options that make the engine compute logits for every prompt token, not only the last: each
prompt token then holds a row of the vocabulary (fp32 for the log-softmax), outside what the profile run
measured (vLLM #5907: "we calculate peak memory running a long prefill *without logprobs*").

Spellings (vLLM's SamplingParams and OpenAI-compatible API, SGLang's, TGI's):
- vLLM: `prompt_logprobs=5`, `"prompt_logprobs": 0` (-1: the whole vocabulary in newer versions), a
  completion request with `"echo": true` and `"logprobs"` (the prompt's logprobs are echoed);
- SGLang: `"return_logprob": true` with `"logprob_start_len": 0` (a start inside the prompt; -1, the
  default, is the output only);
- TGI: `"decoder_input_details": true` (the prefill tokens' logprobs).
"""

from __future__ import annotations

import re

from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources.base import LineParser, Message
from oomguard.diagnosis.sources.triggers import Triggers

_Q = r"""['"]?"""
_PROMPT_LOGPROBS = re.compile(rf"\bprompt_logprobs{_Q}\s*[=:]\s*{_Q}(?P<n>-?\d+)\b")
_ECHO = re.compile(rf"\becho{_Q}\s*[=:]\s*(?:true|True)\b")
_LOGPROBS = re.compile(rf"\blogprobs{_Q}\s*[=:]\s*{_Q}(?:\d+|true|True)\b")
_START_LEN = re.compile(rf"\blogprob_start_len{_Q}\s*[=:]\s*(?P<n>-?\d+)\b")
_RETURN_LOGPROB = re.compile(rf"\breturn_logprob{_Q}\s*[=:]\s*(?:true|True)\b")
_DECODER_DETAILS = re.compile(rf"\bdecoder_input_details{_Q}\s*[=:]\s*(?:true|True)\b")


class Parser(LineParser):
    TRIGGERS = Triggers(words=("prompt_logprobs", "logprob_start_len", "decoder_input_details", "echo"))

    def feed(self, line: Line, msg: Message) -> None:
        body = msg.body
        m = _PROMPT_LOGPROBS.search(body)
        if m:
            self.ctx.signal(line, body, "prompt-logprobs-requested", top=float(m.group("n")))
            return
        if _ECHO.search(body) and _LOGPROBS.search(body):
            self.ctx.signal(line, body, "prompt-logprobs-requested")
            return
        start = _START_LEN.search(body)
        if start and int(start.group("n")) >= 0 and _RETURN_LOGPROB.search(body):
            self.ctx.signal(line, body, "prompt-logprobs-requested")
            return
        if _DECODER_DETAILS.search(body):
            self.ctx.signal(line, body, "prompt-logprobs-requested")
