"""Engine errors a user can act on (printed as one line by the entry points)."""


class EngineUnavailableError(RuntimeError):
    """The engine asked for is not installed or cannot start on this machine."""
