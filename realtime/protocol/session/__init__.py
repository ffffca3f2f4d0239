"""The Realtime session object, by job: its keys (``keys``), the validators of its fields (``fields``), its
state and updates (``config``), and the shapes the client reads (``render``)."""
