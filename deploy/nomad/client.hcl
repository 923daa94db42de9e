# The parts of a Nomad *client* agent's configuration that rock's sandboxes need (merge them
# into /etc/nomad.d/client.hcl of every client that may run sandboxes, after running
# client-setup.sh on it). Certificates: make-test-ca.sh (a test cluster) or your PKI.

client {
  enabled = true

  # Says that client-setup.sh made the isolated network on this node: every sandbox's job is
  # constrained to nodes whose rock_sandbox_network names plugins.nomad.sandbox_network, so a
  # node nobody prepared gets no sandbox (the start says which constraint filtered it).
  meta {
    rock_sandbox_network = "rock-sandboxes"
  }

  # The dynamic ports Nomad publishes each sandbox's rocklet on (on the node's address). Only
  # the admin needs to reach them (client-setup.sh's ADMIN_CIDR).
  min_dynamic_port = 20000
  max_dynamic_port = 32000
}

plugin "docker" {
  config {
    # rock asks for no privileged container and no host path; keep both off.
    allow_privileged = false
    volumes {
      enabled = false
    }
    # Nomad's default list, without net_raw: rock's sandboxes keep a subset of it. Add
    # net_raw or sys_ptrace only if an API key may ask for them ([engine] allowed_cap_add).
    allow_caps = ["audit_write", "chown", "dac_override", "fowner", "fsetid", "kill", "mknod",
                  "net_bind_service", "setfcap", "setgid", "setpcap", "setuid", "sys_chroot"]
  }
}

# Mutual TLS with the servers (RPC) and on this agent's own HTTP API.
tls {
  http = true
  rpc  = true

  ca_file   = "/etc/nomad.d/tls/nomad-agent-ca.pem"
  cert_file = "/etc/nomad.d/tls/global-client-nomad.pem"
  key_file  = "/etc/nomad.d/tls/global-client-nomad-key.pem"

  verify_server_hostname = true # the servers must show server.<region>.nomad
  verify_https_client    = true # every HTTPS caller shows a certificate the CA signed
}
