# The ACL policy of the token the admin places sandboxes with (plugins.nomad.token):
#   nomad acl policy apply -description "rock admin: sandboxes as jobs" rock-sandboxes acl-policy.hcl
#   nomad acl token create -name rock-admin -policy rock-sandboxes
namespace "rock-sandboxes" {
  # submit-job: register, deregister and purge the sandboxes' jobs; read-job: their
  # evaluations and allocations; read-logs: a sandbox's output (rock logs).
  capabilities = ["submit-job", "read-job", "read-logs"]

  # Each sandbox's secret is its job's own Variable, nomad/jobs/<job id>, written before the
  # job is registered and deleted with it (the job's template reads it through its workload
  # identity, so the secret is not in the job). With another plugins.nomad.job_prefix, change
  # "rock-" here. Give nobody else "read" on these paths.
  variables {
    path "nomad/jobs/rock-*" {
      capabilities = ["write", "destroy"]
    }
  }
}
