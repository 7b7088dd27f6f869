"""Clustering's sans-IO core: etcd's data as values, the coordination state machine, and the
replication codec. Nothing here does I/O or imports trio; the shell (``server/net/etcd.py``,
``server/net/cluster_agent.py``) talks to etcd and to the sockets and feeds the results in.
"""
