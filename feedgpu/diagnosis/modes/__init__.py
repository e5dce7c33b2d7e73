"""The ways to diagnose, each ending in the one conclusion (:mod:`..conclusion`).

* :mod:`.live`: a loader handed over whole (``feedgpu.diagnose(loader)``);
* :mod:`.watch`: a loader watched inside the user's own loop;
* :mod:`.replay`: a diagnosis replayed from its JSON, without the loader;
* :mod:`.script` and :mod:`.script_hooks`: an unchanged training script
  (``feedgpu-diagnose run``), and the hooks inside its process.
"""
