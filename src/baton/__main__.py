from baton.cli import main

main()
