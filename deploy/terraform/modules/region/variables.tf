variable "name" {
  description = "Prefix of every resource name (lower-case letters, digits and hyphens)."
  type        = string
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,20}$", var.name))
    error_message = "name: 2-21 characters, lower-case letters, digits and hyphens, starting with a letter."
  }
}

variable "vpc_id" {
  description = "VPC the bridges, the NLB and Redis live in."
  type        = string
  validation {
    condition     = can(regex("^vpc-[0-9a-f]+$", var.vpc_id))
    error_message = "vpc_id must look like vpc-0123abcd."
  }
}

variable "bridge_subnet_ids" {
  description = "Public subnets of the bridges and the NLB, one per availability zone: {\"eu-west-1a\" = \"subnet-...\"}. One auto-scaling group is created per entry. Instances get a public IPv4 address here because RTP goes straight to them."
  type        = map(string)
  validation {
    condition     = length(var.bridge_subnet_ids) >= 1 && alltrue([for s in values(var.bridge_subnet_ids) : can(regex("^subnet-[0-9a-f]+$", s))])
    error_message = "bridge_subnet_ids: at least one availability zone => subnet-... entry."
  }
}

variable "redis_subnet_ids" {
  description = "Private subnets for ElastiCache (at least two availability zones, for the Multi-AZ replica)."
  type        = list(string)
  validation {
    condition     = length(var.redis_subnet_ids) >= 2 && alltrue([for s in var.redis_subnet_ids : can(regex("^subnet-[0-9a-f]+$", s))])
    error_message = "redis_subnet_ids: at least two subnet-... ids in different availability zones."
  }
}

variable "ami_id" {
  description = "AMI of the bridge nodes: NVIDIA driver, Docker, the NVIDIA container toolkit, curl and the AWS CLI (e.g. an AWS Deep Learning Base GPU AMI)."
  type        = string
  validation {
    condition     = can(regex("^ami-[0-9a-f]+$", var.ami_id))
    error_message = "ami_id must look like ami-0123abcd."
  }
}

variable "instance_type" {
  description = "GPU instance type of the bridge nodes (one GPU per bridge)."
  type        = string
  default     = "g6.xlarge"
  validation {
    condition     = can(regex("^(g4dn|g5|g6|g6e|gr6|p4d|p5)\\.[0-9a-z]+$", var.instance_type))
    error_message = "instance_type must be an NVIDIA GPU type (g4dn, g5, g6, g6e, gr6, p4d, p5)."
  }
}

variable "container_image" {
  description = "The CallShield GPU image (deploy/docker/Dockerfile.gpu) with its tag or digest, e.g. 123456789012.dkr.ecr.eu-west-1.amazonaws.com/callshield:1.4.0-gpu."
  type        = string
  validation {
    condition     = length(var.container_image) > 0 && !can(regex("\\s", var.container_image))
    error_message = "container_image: an image reference without spaces."
  }
}

variable "asg_size" {
  description = "Bridges per availability zone: min, max and the desired count at creation (the scaling policy moves it afterwards)."
  type        = object({ min = number, max = number, desired = number })
  default     = { min = 1, max = 4, desired = 1 }
  validation {
    condition     = var.asg_size.min >= 0 && var.asg_size.min <= var.asg_size.desired && var.asg_size.desired <= var.asg_size.max && var.asg_size.max >= 1
    error_message = "asg_size: 0 <= min <= desired <= max, max >= 1."
  }
}

variable "cpu_target_percent" {
  description = "Target-tracking scaling: the average CPU utilisation each AZ's group is held at."
  type        = number
  default     = 55
  validation {
    condition     = var.cpu_target_percent >= 10 && var.cpu_target_percent <= 90
    error_message = "cpu_target_percent must be between 10 and 90."
  }
}

variable "sip_allowed_cidrs" {
  description = "Networks of the SBCs/PBXs allowed to send SIP (through the NLB, and in-dialog straight to a node's Contact address) and RTP."
  type        = list(string)
  validation {
    condition     = length(var.sip_allowed_cidrs) > 0 && alltrue([for c in var.sip_allowed_cidrs : can(cidrhost(c, 0))])
    error_message = "sip_allowed_cidrs: one or more CIDR blocks (never leave SIP open to everyone by accident: write 0.0.0.0/0 if you mean it)."
  }
}

variable "rtp_ports" {
  description = "RTP port range of each bridge (CALLSHIELD_RTP_PORTS), opened to sip_allowed_cidrs on each node's public address."
  type        = object({ from = number, to = number })
  default     = { from = 20000, to = 20999 }
  validation {
    condition     = var.rtp_ports.from >= 1024 && var.rtp_ports.from % 2 == 0 && var.rtp_ports.to > var.rtp_ports.from && var.rtp_ports.to <= 65535
    error_message = "rtp_ports: an even first port >= 1024, to > from, to <= 65535."
  }
}

variable "drain_timeout_s" {
  description = "How long a bridge being scaled in keeps its calls (CALLSHIELD_DRAIN_TIMEOUT_S). The TERMINATING lifecycle hook waits this plus 300 s, and a hook cannot wait more than 7200 s."
  type        = number
  default     = 3600
  validation {
    condition     = var.drain_timeout_s >= 30 && var.drain_timeout_s <= 6900
    error_message = "drain_timeout_s must be between 30 and 6900 seconds."
  }
}

variable "prewarm_timeout_s" {
  description = "How long a new bridge may take to report /ready (models loaded and pre-warmed, Redis reachable) before the launch is abandoned and the instance replaced."
  type        = number
  default     = 900
  validation {
    condition     = var.prewarm_timeout_s >= 60 && var.prewarm_timeout_s <= 3600
    error_message = "prewarm_timeout_s must be between 60 and 3600 seconds."
  }
}

variable "redis_auth_token_secret_arn" {
  description = "Secrets Manager secret (in this region) whose SecretString is the ElastiCache AUTH token (16-128 letters, digits, - and _). Create it outside Terraform; the bridges read it at boot."
  type        = string
  validation {
    condition     = can(regex("^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:.+$", var.redis_auth_token_secret_arn))
    error_message = "redis_auth_token_secret_arn must be a Secrets Manager secret ARN."
  }
}

variable "redis_node_type" {
  description = "ElastiCache node type (a primary and one replica in another AZ)."
  type        = string
  default     = "cache.r7g.large"
  validation {
    condition     = can(regex("^cache\\.[a-z0-9]+\\.[a-z0-9]+$", var.redis_node_type))
    error_message = "redis_node_type must look like cache.r7g.large."
  }
}

variable "redis_kms_key_arn" {
  description = "KMS key for ElastiCache encryption at rest (null: the AWS-managed key)."
  type        = string
  default     = null
}

variable "redis_client_cidrs" {
  description = "Other networks allowed to reach Redis on 6379 (the dashboard and the webhook dispatcher, wherever they run)."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for c in var.redis_client_cidrs : can(cidrhost(c, 0))])
    error_message = "redis_client_cidrs: CIDR blocks."
  }
}

variable "sip_tls_secret_arn" {
  description = "Secrets Manager secret holding the SIP TLS certificate chain and key as JSON {\"cert\": PEM, \"key\": PEM}; null: no SIP over TLS (no 5061 listener)."
  type        = string
  default     = null
  validation {
    condition     = var.sip_tls_secret_arn == null || can(regex("^arn:aws[a-z-]*:secretsmanager:", var.sip_tls_secret_arn))
    error_message = "sip_tls_secret_arn must be a Secrets Manager secret ARN or null."
  }
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
