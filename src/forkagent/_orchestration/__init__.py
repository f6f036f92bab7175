"""Private machinery behind the public ``Agent``: the loop, forks, tasks, routing."""
