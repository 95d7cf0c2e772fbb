"""Text from a scraped endpoint made safe for a terminal and a log line.

Label values, error reasons and URLs come from the network: an ESC sequence in one can clear the screen or
recolour it, and a newline can forge an alert line. Control characters (C0, DEL, C1) and the Unicode line
and bidi-override characters are written as escapes (`\\x1b`, `\\n`, `\\u202e`); everything else passes.
"""

from __future__ import annotations

import re

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    char = match.group(0)
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char) or (
        f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"
    )


def printable(text: str) -> str:
    """`text` with every control character written as an escape."""
    return _UNSAFE.sub(_escape, text)
