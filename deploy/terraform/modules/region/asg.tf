resource "aws_launch_template" "bridge" {
  name_prefix   = "${var.name}-bridge-"
  image_id      = var.ami_id
  instance_type = var.instance_type
  user_data = base64encode(templatefile("${path.module}/user_data.sh.tftpl", {
    region            = local.region
    image             = var.container_image
    launch_hook       = local.launch_hook
    terminate_hook    = local.terminate_hook
    redis_host        = aws_elasticache_replication_group.this.primary_endpoint_address
    redis_secret_arn  = var.redis_auth_token_secret_arn
    tls_secret_arn    = local.tls ? var.sip_tls_secret_arn : ""
    rtp_ports         = "${var.rtp_ports.from}-${var.rtp_ports.to}"
    http_port         = local.http_port
    drain_timeout_s   = var.drain_timeout_s
    prewarm_timeout_s = var.prewarm_timeout_s
  }))

  iam_instance_profile {
    arn = aws_iam_instance_profile.bridge.arn
  }

  network_interfaces {
    associate_public_ip_address = true # RTP comes straight here
    security_groups             = [aws_security_group.bridge.id]
    delete_on_termination       = true
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required" # IMDSv2 only
    http_put_response_hop_limit = 1          # the container (host network) never needs it
    instance_metadata_tags      = "enabled"  # aws:autoscaling:groupName for the hooks
  }

  block_device_mappings {
    device_name = "/dev/xvda"
    ebs {
      volume_size           = 100
      volume_type           = "gp3"
      encrypted             = true
      delete_on_termination = true
    }
  }

  tag_specifications {
    resource_type = "instance"
    tags          = merge(local.common_tags, { Name = "${var.name}-bridge" })
  }

  tags = local.common_tags
}

# One group per availability zone, so each AZ scales (and fails) on its own and the NLB
# keeps a healthy node in every AZ it serves.
resource "aws_autoscaling_group" "bridge" {
  for_each                  = var.bridge_subnet_ids
  name                      = "${var.name}-bridge-${each.key}"
  vpc_zone_identifier       = [each.value]
  min_size                  = var.asg_size.min
  max_size                  = var.asg_size.max
  desired_capacity          = var.asg_size.desired
  target_group_arns         = [for tg in aws_lb_target_group.sip : tg.arn]
  health_check_type         = "ELB"
  health_check_grace_period = var.prewarm_timeout_s
  default_instance_warmup   = 120
  termination_policies      = ["OldestLaunchTemplate", "OldestInstance"]

  launch_template {
    id      = aws_launch_template.bridge.id
    version = aws_launch_template.bridge.latest_version
  }

  # In the group from the very first instance (a separate aws_autoscaling_lifecycle_hook
  # would miss the instances launched while the group is created).
  initial_lifecycle_hook {
    name                 = local.launch_hook
    lifecycle_transition = "autoscaling:EC2_INSTANCE_LAUNCHING"
    heartbeat_timeout    = var.prewarm_timeout_s + 120
    default_result       = "ABANDON" # not pre-warmed in time: replaced, never InService
  }

  initial_lifecycle_hook {
    name                 = local.terminate_hook
    lifecycle_transition = "autoscaling:EC2_INSTANCE_TERMINATING"
    heartbeat_timeout    = local.terminate_wait
    default_result       = "CONTINUE"
  }

  instance_refresh {
    strategy = "Rolling"
    preferences {
      min_healthy_percentage = 100
      max_healthy_percentage = 200
    }
  }

  dynamic "tag" {
    for_each = merge(local.common_tags, { Name = "${var.name}-bridge-${each.key}" })
    content {
      key                 = tag.key
      value               = tag.value
      propagate_at_launch = true
    }
  }

  lifecycle {
    ignore_changes = [desired_capacity] # the scaling policy owns it after creation
  }
}

resource "aws_autoscaling_policy" "cpu" {
  for_each               = aws_autoscaling_group.bridge
  name                   = "${var.name}-cpu-target"
  autoscaling_group_name = each.value.name
  policy_type            = "TargetTrackingScaling"

  target_tracking_configuration {
    predefined_metric_specification {
      predefined_metric_type = "ASGAverageCPUUtilization"
    }
    target_value = var.cpu_target_percent
  }
}
