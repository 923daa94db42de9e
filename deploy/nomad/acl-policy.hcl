# The ACL policy of the token the admin places sandboxes with (plugins.nomad.token):
#   nomad acl policy apply -description "rock admin: sandboxes as jobs" rock-sandboxes acl-policy.hcl
#   nomad acl token create -name rock-admin -policy rock-sandboxes
namespace "rock-sandboxes" {
  # submit-job: register, deregister and purge the sandboxes' jobs; read-job: their
  # evaluations and allocations; read-logs: a sandbox's output (rock logs).
  capabilities = ["submit-job", "read-job", "read-logs"]
}
