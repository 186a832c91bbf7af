"""The per-message pipeline: state check → rewrite → retrieve → answer (tools) → verify citations."""

from gateway.pipeline.core import Pipeline, PipelineResult, Turn

__all__ = ["Pipeline", "PipelineResult", "Turn"]
