from moesim.app import main

main()
