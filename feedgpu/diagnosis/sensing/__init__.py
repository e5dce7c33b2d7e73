"""What the diagnosis measures, and how: the first stage of its pipeline.

* :mod:`.cloning`: the user's loader rebuilt with one setting changed, on a sample;
* :mod:`.probes`: where a batch's time goes, piece by piece in the main process;
* :mod:`.runs`: one measured run of a loader (pace, CPU, memory, reads);
* :mod:`.threads`: the workers' thread pools;
* :mod:`.io_counters`: what a process read, from the kernel's own counters;
* :mod:`.steps`: what the step runs on (a simulated accelerator, the user's step timed,
  or a step replayed from its measured CPU and device time).
"""
