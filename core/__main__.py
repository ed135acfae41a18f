from moesim.cli.app import entry

entry()
