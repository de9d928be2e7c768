package envvars

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// masterNamespace and masterService name the API server's Service, whose
// variables every pod gets, whatever its enableServiceLinks (the kubelet's
// masterServices).
const (
	masterNamespace = "default"
	masterService   = "kubernetes"
)

// ServiceEnv returns the service environment variables of a pod of
// namespace, with the kubelet's semantics (getServiceEnvVarMap and
// pkg/kubelet/envvars FromServices):
//
//   - only Services with a cluster IP count (not "" nor "None");
//   - the master service default/kubernetes always; with
//     enableServiceLinks, every Service of namespace too (one of namespace
//     named "kubernetes" wins over the master one);
//   - for each Service NAME (upper case, '-' as '_'):
//     NAME_SERVICE_HOST=<cluster IP>, NAME_SERVICE_PORT=<first port>,
//     NAME_SERVICE_PORT_<PORT NAME>=<port> for each named port, and the
//     Docker link variables NAME_PORT=<proto>://<ip>:<first port> and, for
//     each port, NAME_PORT_<port>_<PROTO>=<proto>://<ip>:<port> with
//     _PROTO, _PORT and _ADDR (an IPv6 address in brackets in the URLs;
//     the protocol TCP when unset).
//
// services may hold Services of any namespace; the others are ignored.
// The result is ordered by Service name, each Service's variables in the
// order above (the kubelet's order is a map's); a name defined twice keeps
// its first position and the later value.
func ServiceEnv(services []*v1.Service, namespace string, enableServiceLinks bool) []EnvVar {
	picked := map[string]*v1.Service{}
	for _, s := range services {
		if s == nil || !hasClusterIP(s) {
			continue
		}
		switch {
		case s.Namespace == masterNamespace && s.Name == masterService:
			if _, ok := picked[s.Name]; !ok {
				picked[s.Name] = s
			}
		case s.Namespace == namespace && enableServiceLinks:
			picked[s.Name] = s
		}
	}
	ordered := make([]*v1.Service, 0, len(picked))
	for _, s := range picked {
		ordered = append(ordered, s)
	}
	slices.SortFunc(ordered, func(a, b *v1.Service) int { return cmp.Compare(a.Name, b.Name) })

	env := &orderedEnv{index: map[string]int{}}
	for _, s := range ordered {
		addService(env, s)
	}
	return env.vars
}

func hasClusterIP(s *v1.Service) bool {
	return s.Spec.ClusterIP != "" && s.Spec.ClusterIP != v1.ClusterIPNone
}

// addService adds one Service's variables.
func addService(env *orderedEnv, s *v1.Service) {
	prefix := serviceVarName(s.Name)
	ip := s.Spec.ClusterIP
	env.set(prefix+"_SERVICE_HOST", ip)
	if len(s.Spec.Ports) == 0 {
		return // the API server requires ports; the kubelet would panic
	}
	env.set(prefix+"_SERVICE_PORT", strconv.Itoa(int(s.Spec.Ports[0].Port)))
	for _, p := range s.Spec.Ports {
		if p.Name != "" {
			env.set(prefix+"_SERVICE_PORT_"+serviceVarName(p.Name), strconv.Itoa(int(p.Port)))
		}
	}
	for i, p := range s.Spec.Ports {
		proto := strings.ToLower(string(cmp.Or(p.Protocol, v1.ProtocolTCP)))
		port := strconv.Itoa(int(p.Port))
		url := proto + "://" + joinHostPort(ip, port)
		if i == 0 {
			env.set(prefix+"_PORT", url)
		}
		portPrefix := prefix + "_PORT_" + port + "_" + strings.ToUpper(proto)
		env.set(portPrefix, url)
		env.set(portPrefix+"_PROTO", proto)
		env.set(portPrefix+"_PORT", port)
		env.set(portPrefix+"_ADDR", ip)
	}
}

// serviceVarName is a Service or port name as it appears in variable
// names: upper case, '-' as '_'.
func serviceVarName(name string) string {
	return strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// joinHostPort is net.JoinHostPort (this package does no networking).
func joinHostPort(host, port string) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}
