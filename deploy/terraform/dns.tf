# Latency-based routing: one alias record per region for the same name, each pointing at
# that region's NLB. Route 53 answers with the region of lowest latency to the caller's
# resolver whose NLB has a healthy target (evaluate_target_health: no node /ready there
# means the next-nearest region). Route 53 is global; its API is served from us-east-1.
resource "aws_route53_record" "sip" {
  provider       = aws.us_east_1
  for_each       = local.stacks
  zone_id        = var.hosted_zone_id
  name           = var.sip_hostname
  type           = "A"
  set_identifier = each.key

  latency_routing_policy {
    region = each.key
  }

  alias {
    name                   = each.value.nlb_dns_name
    zone_id                = each.value.nlb_zone_id
    evaluate_target_health = true
  }
}
