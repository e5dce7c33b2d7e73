"""The course's models of the input pipeline, each named for what it models.

* :mod:`.pipeline`: the DataLoader's pipeline (workers, prefetching, the step): a formula,
  a small event simulation, and words;
* :mod:`.copies`: host-to-device copies (latency + bytes / bandwidth, pinning), pinned
  copies as a point and pageable ones as a range;
* :mod:`.cores`: what the course sizes by the machine's cores;
* :mod:`.device`: a simulated GPU with a copy engine and a compute engine, on a virtual clock;
* :mod:`.accelerator`: a simulated accelerator that runs steps asynchronously in real time;
* :mod:`.remote_storage`: reading from remote storage (Little's law, a store that plays it out).

They measure nothing (the instruments are :mod:`feedgpu.measure`); the notebooks fit and
check them against the student's own measurements and the recorded readings.
"""
