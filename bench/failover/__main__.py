from bench.failover.run import main

main()
