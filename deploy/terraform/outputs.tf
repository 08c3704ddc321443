output "sip_hostname" {
  description = "Where SBCs and PBXs send SIP (latency-routed to the nearest healthy region)."
  value       = var.sip_hostname
}

output "regions" {
  description = "Per region: the NLB, its SIP ports, the Redis endpoint and the auto-scaling group per AZ."
  value = {
    for region, s in local.stacks : region => {
      nlb_dns_name            = s.nlb_dns_name
      sip_ports               = s.sip_ports
      redis_primary_endpoint  = s.redis_primary_endpoint
      autoscaling_group_names = s.autoscaling_group_names
    }
  }
}
