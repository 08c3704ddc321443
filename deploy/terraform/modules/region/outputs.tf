output "nlb_dns_name" {
  description = "DNS name of the region's SIP load balancer."
  value       = aws_lb.sip.dns_name
}

output "nlb_zone_id" {
  description = "Route 53 zone id of the load balancer (for alias records)."
  value       = aws_lb.sip.zone_id
}

output "sip_ports" {
  description = "SIP ports the load balancer listens on (5060 UDP+TCP, 5061 TLS passthrough when configured)."
  value       = local.sip_ports
}

output "redis_primary_endpoint" {
  description = "ElastiCache primary endpoint (TLS, AUTH): rediss://:<token>@<this>:6379/0."
  value       = aws_elasticache_replication_group.this.primary_endpoint_address
}

output "autoscaling_group_names" {
  description = "Bridge auto-scaling group per availability zone."
  value       = { for az, g in aws_autoscaling_group.bridge : az => g.name }
}

output "bridge_security_group_id" {
  description = "Security group of the bridge nodes."
  value       = aws_security_group.bridge.id
}
