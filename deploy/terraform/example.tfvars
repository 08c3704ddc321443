# terraform plan -var-file=example.tfvars  (replace every id with yours)
name              = "callshield"
hosted_zone_id    = "Z0123456789ABCDEFGHIJ"
sip_hostname      = "sip.callshield.example.com"
sip_allowed_cidrs = ["198.51.100.0/24"] # your SBCs / carriers
container_image = {
  "eu-west-1" = "<account>.dkr.ecr.eu-west-1.amazonaws.com/callshield:1.0.0-gpu"
  "us-east-1" = "<account>.dkr.ecr.us-east-1.amazonaws.com/callshield:1.0.0-gpu"
}
regions = {
  "eu-west-1" = {
    vpc_id                      = "vpc-0a1b2c3d"
    bridge_subnet_ids           = { "eu-west-1a" = "subnet-0a", "eu-west-1b" = "subnet-0b" }
    redis_subnet_ids            = ["subnet-1a", "subnet-1b"]
    ami_id                      = "ami-0123abcd"
    redis_auth_token_secret_arn = "arn:aws:secretsmanager:eu-west-1:<account>:secret:callshield-redis-AbCdEf"
    sip_tls_secret_arn          = "arn:aws:secretsmanager:eu-west-1:<account>:secret:callshield-sip-tls-AbCdEf"
  }
  "us-east-1" = {
    vpc_id                      = "vpc-0f1e2d3c"
    bridge_subnet_ids           = { "us-east-1a" = "subnet-0d", "us-east-1b" = "subnet-0e" }
    redis_subnet_ids            = ["subnet-1d", "subnet-1e"]
    ami_id                      = "ami-0456cdef"
    redis_auth_token_secret_arn = "arn:aws:secretsmanager:us-east-1:<account>:secret:callshield-redis-GhIjKl"
    asg_size                    = { min = 2, max = 8, desired = 2 }
  }
}
