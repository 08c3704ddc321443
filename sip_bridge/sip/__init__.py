"""SIP and SIPREC for the bridge: wire-format parsers (messages, SDP, multipart bodies,
recording metadata), offer/answer, transactions, dialogs, the UAS core and its asyncio
transports."""
