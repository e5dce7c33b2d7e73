"""What every room of the course uses, and nothing of the course's own subject.

* :mod:`.checks`: argument checks (a count, a time, a choice);
* :mod:`.cli`: one runner for every console command (one line and exit 2 on a usage
  error, 130 on Ctrl-C);
* :mod:`.files`: one atomic writer for files and one for folders;
* :mod:`.spin`: the spin loop (CPU work of known length);
* :mod:`.processes`: the cores this process may use, and DataLoader workers stopped;
* :mod:`.moved`: the modules that moved, and the release that removes their old paths.

Nothing here imports another room of the course.
"""
