"""Stand-in for the Python `openai` package, which cannot be installed here.

Five files of llama-server's test suite import `OpenAI` at the top. With this module on
PYTHONPATH they load, and only a test that builds a client is skipped (at the constructor);
every other test in those files runs.
"""

import pytest

REASON = "the Python openai package is not available here"


class OpenAI:
    def __init__(self, *args, **kwargs):
        pytest.skip(REASON)
