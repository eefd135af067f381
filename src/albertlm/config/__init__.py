"""Layer 0: typed configuration. No torch import."""
from albertlm.config.model import AlbertConfig, ConfigError, ModelConfig

__all__ = ["AlbertConfig", "ConfigError", "ModelConfig"]
