"""The old path of :mod:`feedgpu.base.checks`, the module itself (see :mod:`feedgpu.base.moved`)."""
from feedgpu.base.moved import alias

alias(__name__)
