"""Browser calls over WebRTC: the offer and its answer (``views``), the offer's caps counted before it is parsed
(``offer_limits``), the call as a transport (``call``), its audio (``media``), and the data channel's message
size enforced while aiortc reassembles (``sctp_limit``).
"""
