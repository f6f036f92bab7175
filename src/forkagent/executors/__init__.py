"""Executors beyond this process: ``forkagent.executors.ray.RayExecutor`` (the ``ray`` extra).

The in-process executor, the default, is ``forkagent.InProcessExecutor``.
"""
