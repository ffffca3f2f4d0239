"""Phone calls over SIP: the listener (``signalling``) and its sockets (``sockets``), a call's RTP audio
(``media``), the call as a transport (``call``), the operator's webhook (``webhook``) and control endpoints
(``views``); ``config`` holds the settings.

Import-cheap: the settings import ``config`` from here.
"""
