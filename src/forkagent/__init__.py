"""forkagent: agents whose sub-agents fork the parent context and share its prompt cache."""
