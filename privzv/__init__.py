"""privzv: differential-privacy accounting for zeroth-order vertical federated learning."""

__version__ = "0.1.0"
