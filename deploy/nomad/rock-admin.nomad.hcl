# rock's admin as a Nomad service, placing every sandbox as a Nomad job of its own (the `nomad`
# runtime of rock-nomad). Two admins (count = 2, on two nodes) keep their records in one
# PostgreSQL database and form one cluster (`[engine] cluster`): one leads and runs the
# background work, both answer calls, and the other takes over within seconds when the leader
# dies. See README.md next to this file (and packages/rock-nomad/README.md, "On a real cluster")
# for the token, the namespace, the database and the ports that must be reachable.
#
#   nomad var put -namespace default nomad/jobs/rock-admin \
#       nomad_token=<secret of a token with the rock-sandboxes policy> \
#       postgres_url='postgresql://rock:<password>@<database address>:5432/rock' \
#       api_keys='team-a=sha256:<hex>' \
#       nomad_ca=@tls/nomad-agent-ca.pem nomad_client_cert=@tls/rock-admin.pem \
#       nomad_client_key=@tls/rock-admin-key.pem
#   nomad job run -var image=registry.example/rock-admin:0.1.0 deploy/nomad/rock-admin.nomad.hcl

variable "image" {
  type        = string
  default     = "rock-admin:0.1.0"
  description = "An image with rock-sdk[admin] and rock-nomad installed (deploy/nomad/Dockerfile)."
}

variable "datacenters" {
  type        = list(string)
  default     = ["*"]
  description = "Where the admin runs."
}

variable "sandbox_namespace" {
  type        = string
  default     = "rock-sandboxes"
  description = "The namespace of the sandboxes' jobs (create it first: nomad namespace apply rock-sandboxes)."
}

variable "sandbox_datacenters" {
  type        = string
  default     = "*"
  description = "Where sandboxes are placed, names separated by commas."
}

variable "nomad_address" {
  type        = string
  default     = "https://{{ env \"attr.unique.network.ip-address\" }}:4646"
  description = "Nomad's HTTP API as the admin reaches it (default: the agent on the admin's own node, over TLS: server.hcl, client.hcl)."
}

variable "sandbox_network" {
  type        = string
  default     = "rock-sandboxes"
  description = "The isolated Docker network client-setup.sh made on every client (plugins.nomad.sandbox_network)."
}

variable "admins" {
  type        = number
  default     = 2
  description = "How many admins run, each on a node of its own (one leads; the others answer calls and take over)."
}

variable "cluster" {
  type        = string
  default     = "rock-admin"
  description = "The cluster's name ([engine] cluster): the admins sharing it on one database elect one leader."
}

variable "port" {
  type        = number
  default     = 8080
  description = "The admin's port on its node: SDK clients and every node's artifact download reach it there."
}

job "rock-admin" {
  type        = "service"
  datacenters = var.datacenters

  group "admin" {
    # Two admins on one PostgreSQL database (the Variable's postgres_url), each on a node of
    # its own: a node's loss leaves the other serving (and leading).
    count = var.admins

    constraint {
      operator = "distinct_hosts"
      value    = "true"
    }

    # One admin at a time is replaced on an update; the other serves meanwhile.
    update {
      max_parallel     = 1
      health_check     = "checks"
      min_healthy_time = "10s"
      healthy_deadline = "5m"
    }

    network {
      mode = "host"
      port "http" {
        static = var.port
      }
    }

    # The records are in PostgreSQL: this is the admin's pid file and log only.
    ephemeral_disk {
      size = 300
    }

    service {
      provider = "nomad"
      name     = "rock-admin"
      port     = "http"
      # Each admin answers GET /healthz with 200 while it serves, leader or not.
      check {
        type     = "http"
        path     = "/healthz"
        interval = "10s"
        timeout  = "2s"
      }
    }

    restart {
      attempts = 3
      interval = "5m"
      delay    = "10s"
      mode     = "delay"
    }

    task "admin" {
      driver = "docker"

      config {
        image   = var.image
        ports   = ["http"]
        command = "rock"
        args    = ["admin", "serve", "--config", "/local/admin.toml"]
      }

      # The admin's settings. rocklet_url is where the sandboxes' nodes download rock's agent
      # (GET /rocklet.pyz, no key needed, checked against its SHA-256 by Nomad).
      template {
        destination = "local/admin.toml"
        change_mode = "restart"
        data        = <<-EOT
          [admin]
          host = "0.0.0.0"
          port = {{ env "NOMAD_PORT_http" }}
          state_dir = "{{ env "NOMAD_ALLOC_DIR" }}/data"

          [engine]
          runtime = "nomad"
          rocklet_url = "http://{{ env "NOMAD_ADDR_http" }}/rocklet.pyz"
          # The records: store is ROCK_ENGINE_STORE, the Variable's postgres_url (secrets/admin.env).
          # The admins of one cluster elect a leader and share the sandboxes (owner cluster:<name>).
          cluster = "${var.cluster}"
          # Where the other admins send what only the leader does (starts, stops, deletions,
          # warm pools) while this one leads: its node's address, not 127.0.0.1.
          cluster_address = "http://{{ env "NOMAD_ADDR_http" }}"

          [plugins.nomad]
          address = "${var.nomad_address}"
          namespace = "${var.sandbox_namespace}"
          datacenters = "${var.sandbox_datacenters}"
          sandbox_network = "${var.sandbox_network}"
          # Mutual TLS with Nomad's API (verify_https_client): the files the templates below
          # write from the job's Variable.
          ca_cert = "{{ env "NOMAD_SECRETS_DIR" }}/nomad-ca.pem"
          client_cert = "{{ env "NOMAD_SECRETS_DIR" }}/nomad-client.pem"
          client_key = "{{ env "NOMAD_SECRETS_DIR" }}/nomad-client-key.pem"
        EOT
      }

      # The CA that signed Nomad's certificates and the admin's client certificate
      # (make-test-ca.sh: nomad-agent-ca.pem, rock-admin.pem, rock-admin-key.pem).
      template {
        destination = "secrets/nomad-ca.pem"
        change_mode = "restart"
        data        = "{{ with nomadVar \"nomad/jobs/rock-admin\" }}{{ .nomad_ca }}{{ end }}"
      }
      template {
        destination = "secrets/nomad-client.pem"
        change_mode = "restart"
        data        = "{{ with nomadVar \"nomad/jobs/rock-admin\" }}{{ .nomad_client_cert }}{{ end }}"
      }
      template {
        destination = "secrets/nomad-client-key.pem"
        perms       = "0600"
        change_mode = "restart"
        data        = "{{ with nomadVar \"nomad/jobs/rock-admin\" }}{{ .nomad_client_key }}{{ end }}"
      }

      # Secrets from the job's own Nomad Variable (readable by this job's workload identity):
      # the ACL token the admin places sandboxes with, the SDK clients' API keys (the same for
      # both admins: a client's next call may reach either) and the database's URL with its
      # password.
      template {
        destination = "secrets/admin.env"
        env         = true
        change_mode = "restart"
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/rock-admin" }}
          ROCK_PLUGIN_NOMAD_TOKEN={{ .nomad_token }}
          ROCK_ADMIN_API_KEYS={{ .api_keys }}
          ROCK_ENGINE_STORE={{ .postgres_url }}
          {{ end }}
        EOT
      }

      resources {
        cpu    = 1000
        memory = 512
      }
    }
  }
}
