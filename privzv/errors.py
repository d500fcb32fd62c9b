"""The one error type that the CLI turns into a one-line message and exit code 2."""


class PrivzvError(ValueError):
    """Bad input or an impossible request, with a message naming the value and what is allowed."""
