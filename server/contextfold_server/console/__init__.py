"""The web console: pages an operator opens in a browser, served by every worker (`--console-port`)."""
