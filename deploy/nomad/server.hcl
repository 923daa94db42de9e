# The TLS part of a Nomad *server* agent's configuration for a cluster rock's admin places
# sandboxes on (merge it into /etc/nomad.d/server.hcl of every server). The admin then calls
# the API at https://<server>:4646 with plugins.nomad.ca_cert, client_cert and client_key
# (rock-admin.pem from make-test-ca.sh, or a certificate of your PKI signed by the same CA).

server {
  enabled = true
}

acl {
  enabled = true # the admin's token: acl-policy.hcl
}

tls {
  http = true # the HTTP API (rock's admin, the CLI, the UI) over TLS
  rpc  = true # servers with each other (Raft) and with clients, mutual TLS

  ca_file   = "/etc/nomad.d/tls/nomad-agent-ca.pem"
  cert_file = "/etc/nomad.d/tls/global-server-nomad.pem"
  key_file  = "/etc/nomad.d/tls/global-server-nomad-key.pem"

  verify_server_hostname = true # a client certificate cannot act as a server
  verify_https_client    = true # the API asks every caller for a certificate the CA signed
}
