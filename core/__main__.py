from moesim.cli.app import main

main()
