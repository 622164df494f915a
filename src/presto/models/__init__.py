"""Model assets: where the weights come from (embedded GGUF, local folder, tiny test model)."""

from presto.models.assets import (
    DEFAULT_MODEL,
    ModelNotFoundError,
    cache_root,
    check_model_folder,
    embedded_gguf_path,
    is_complete,
    make_tiny_model,
    resolve_model_dir,
)

__all__ = [
    "DEFAULT_MODEL",
    "ModelNotFoundError",
    "cache_root",
    "check_model_folder",
    "embedded_gguf_path",
    "is_complete",
    "make_tiny_model",
    "resolve_model_dir",
]
