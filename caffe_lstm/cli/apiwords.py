"""The library's errors speak the API's words (``plugins=[...]``); the CLI prints its own
(``--plugin FILE.py|MODULE``). Only these phrases are rewritten: the library writes them
exactly so."""

from __future__ import annotations

#: API phrase -> the command line's.
CLI_WORDS = {
    "plugins=[...]": "--plugin FILE.py|MODULE",
    "python_path=DIR": "--python-path DIR",
    "outputs=[...]": "--outputs NAME[,NAME...]",
    "(the traceback is the error's __cause__)": "(--debug shows its traceback)",
}


def in_cli_words(text: str) -> str:
    """``text`` with the API phrases of CLI_WORDS replaced by the command line's."""
    for api_words, cli_words in CLI_WORDS.items():
        text = text.replace(api_words, cli_words)
    return text
