from shadow.cli import main

main()
