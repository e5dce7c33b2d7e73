"""The old path of :mod:`feedgpu.workflows.bench.record`, the module itself (see :mod:`feedgpu.base.moved`)."""
from feedgpu.base.moved import alias

alias(__name__)
