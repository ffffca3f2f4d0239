"""The live session: its core, the interface its transports implement, and its mailbox on the channel layer.

It sits above the pure protocol (``realtime.protocol``) and above access, audit and node, which it uses.
"""
