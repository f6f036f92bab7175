from forkagent.cli import main

main()
