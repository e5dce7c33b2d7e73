"""The course's measuring instruments.

* :mod:`~feedgpu.measure.timing`: the DataLoader timing harness (warm-up, repeats, waits);
* :mod:`~feedgpu.measure.sweep`: the harness over a grid of settings;
* :mod:`~feedgpu.measure.stages`: where one image's time goes (read, decode, augment, ...);
* :mod:`~feedgpu.measure.transfer`: what handing a batch across processes costs;
* :mod:`~feedgpu.measure.machine`: cores, memory, start method and accelerator;
* :mod:`~feedgpu.measure.memory`: RSS, USS and PSS of a process and its DataLoader workers over time;
* :mod:`~feedgpu.measure.pinning`: ``pin_memory=True`` without an accelerator, and copies to a real GPU.

Their plots are in :mod:`feedgpu.plots`; the workloads they measure in :mod:`feedgpu.workloads`.
"""
