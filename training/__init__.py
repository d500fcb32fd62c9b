"""The VFL protocol in torch. Train with your own modules from Python:
``privzv.training.fit(config, dataset, out, devices=[...], head=...)`` (docs/training.md,
"Your models"). The names below load their module on first use."""

_LAZY = {
    "fit": "privzv.training.api",
    "TrainConfig": "privzv.training.config",
    "VerticalDataset": "privzv.training.data",
    "ModelInput": "privzv.training.models",
    "register_device_model": "privzv.training.models",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'privzv.training' has no attribute {name!r}")
