"""The server's settings: one typed `Settings`, its flags a group per documentation table
(server, admission, tenants; `Flag` the annotation), what is generated from it (the CLI
parser, environment and TOML reading, the flag tables), and the served models' specs."""
