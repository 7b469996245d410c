"""A store node's SSD tier: files, the agent's rules, the stack and the worker that runs
them against the master (docs/store_client.md, "SSD tier").

::

    ssd.py     the SSD files (one per object version, checksummed)
    agent.py   what the node does with the master's tier requests (sans-IO)
    stack.py   the tier's place under a node's DRAM segment
    worker.py  runs the agent's jobs and reports them to the master
"""
