from prbench.cli import main

main()
