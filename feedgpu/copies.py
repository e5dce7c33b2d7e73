"""The old path of :mod:`feedgpu.models.copies`, the module itself (see :mod:`feedgpu.base.moved`)."""
from feedgpu.base.moved import alias

alias(__name__)
