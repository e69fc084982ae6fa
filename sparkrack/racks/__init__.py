"""A fleet of racks behind one router: the fleet file, the router (SMG) and the rolls that
go rack by rack without failing a request (docs/fleet.md)."""
