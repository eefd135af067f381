"""The one exception type the CLI turns into a one-line message and a non-zero exit."""


class UserError(Exception):
    """Bad input from the user (a path, a value, a file's content): message, exit code 2, no traceback."""

    exit_code = 2
