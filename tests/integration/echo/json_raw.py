"""JSON text as it stood: the raw text of one member of an object, found with the standard
library's own decoder (raw_decode gives where each value ends), so echo tools can answer with
exactly the bytes they were sent and log them, with no parse and print in between."""
import json

_decoder = json.JSONDecoder()
_SPACE = " \t\n\r"


def _skip(text, i):
    while i < len(text) and text[i] in _SPACE:
        i += 1
    return i


def member_text(text, *path):
    """The raw text of text[path[0]][path[1]]... (objects only); KeyError if absent."""
    start, end = 0, len(text)
    for key in path:
        i = _skip(text, start)
        if text[i] != "{":
            raise KeyError(key)
        i = _skip(text, i + 1)
        found = None
        while text[i] != "}":
            name, i = _decoder.raw_decode(text, i)
            i = _skip(text, i)
            assert text[i] == ":"
            i = _skip(text, i + 1)
            _, value_end = _decoder.raw_decode(text, i)
            if name == key:
                found = (i, value_end)
            i = _skip(text, value_end)
            if text[i] == ",":
                i = _skip(text, i + 1)
        if found is None:
            raise KeyError(key)
        start, end = found
    return text[start:end]
