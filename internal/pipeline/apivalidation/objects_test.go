package apivalidation

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// keyMessage is the API server's message for a key that is not a valid
// ConfigMap or Secret key (IsConfigMapKey), for keys that fail its pattern.
const keyMessage = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"

var longKey = strings.Repeat("k", 254)

func TestConfigMap(t *testing.T) {
	base := func() *v1.ConfigMap {
		return &v1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "web-config", Namespace: "default"},
			Data:       map[string]string{"nginx.conf": "events {}", "a-b_c.D": "x", ".hidden": "y"},
			BinaryData: map[string][]byte{"logo.png": {0x89, 'P', 'N', 'G'}},
		}
	}
	for _, tc := range []struct {
		name   string
		mutate func(*v1.ConfigMap)
		want   string
	}{
		{"valid", func(*v1.ConfigMap) {}, ""},
		{"no data", func(cm *v1.ConfigMap) { cm.Data, cm.BinaryData = nil, nil }, ""},
		{"key ./..data", func(cm *v1.ConfigMap) { cm.Data["./..data"] = "x" },
			`data[./..data]: Invalid value: "./..data": ` + keyMessage},
		{"key ..data", func(cm *v1.ConfigMap) { cm.Data["..data"] = "x" },
			`data[..data]: Invalid value: "..data": must not start with '..'`},
		{"key ..", func(cm *v1.ConfigMap) { cm.Data[".."] = "x" },
			`data[..]: Invalid value: "..": must not be '..'`},
		{"key a/b", func(cm *v1.ConfigMap) { cm.Data["a/b"] = "x" },
			`data[a/b]: Invalid value: "a/b": ` + keyMessage},
		{"key too long", func(cm *v1.ConfigMap) { cm.Data[longKey] = "x" },
			"data[" + longKey + `]: Invalid value: "` + longKey + `": must be no more than 253 characters`},
		{"binaryData key ..data", func(cm *v1.ConfigMap) { cm.BinaryData["..data"] = []byte("x") },
			`binaryData[..data]: Invalid value: "..data": must not start with '..'`},
		{"key in data and binaryData", func(cm *v1.ConfigMap) { cm.BinaryData["nginx.conf"] = []byte("x") },
			`data[nginx.conf]: Invalid value: "nginx.conf": duplicate of key present in binaryData`},
		{"bad name", func(cm *v1.ConfigMap) { cm.Name = "Web_Config" },
			`metadata.name: Invalid value: "Web_Config": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`},
		{"no namespace", func(cm *v1.ConfigMap) { cm.Namespace = "" }, "metadata.namespace: Required value"},
		{"too large", func(cm *v1.ConfigMap) { cm.Data["big"] = strings.Repeat("x", 1<<20) },
			// The API server names the whole object with an empty path.
			"[]: Too long: may not be more than 1048576 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm := base()
			tc.mutate(cm)
			before := cm.DeepCopy()
			check(t, ConfigMap(cm), tc.want)
			if !equalJSON(cm, before) {
				t.Error("ConfigMap changed its argument")
			}
		})
	}
}

func TestSecret(t *testing.T) {
	base := func() *v1.Secret {
		return &v1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default"},
			Data:       map[string][]byte{"password": []byte("hunter2"), "user.name": []byte("app")},
		}
	}
	for _, tc := range []struct {
		name   string
		mutate func(*v1.Secret)
		want   string
	}{
		{"valid", func(*v1.Secret) {}, ""},
		{"stringData", func(s *v1.Secret) { s.StringData = map[string]string{"token": "t"} }, ""},
		{"key ./..data", func(s *v1.Secret) { s.Data["./..data"] = nil },
			`data[./..data]: Invalid value: "./..data": ` + keyMessage},
		{"key ..data", func(s *v1.Secret) { s.Data["..data"] = nil },
			`data[..data]: Invalid value: "..data": must not start with '..'`},
		{"stringData key ..data", func(s *v1.Secret) { s.StringData = map[string]string{"..data": "x"} },
			`data[..data]: Invalid value: "..data": must not start with '..'`},
		{"key a/b", func(s *v1.Secret) { s.Data["a/b"] = nil },
			`data[a/b]: Invalid value: "a/b": ` + keyMessage},
		{"key too long", func(s *v1.Secret) { s.Data[longKey] = nil },
			"data[" + longKey + `]: Invalid value: "` + longKey + `": must be no more than 253 characters`},
		{"tls without its keys", func(s *v1.Secret) { s.Type = v1.SecretTypeTLS },
			"data[tls.crt]: Required value; data[tls.key]: Required value"},
		{"bad name", func(s *v1.Secret) { s.Name = "-db" },
			`metadata.name: Invalid value: "-db": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`},
		{"too large", func(s *v1.Secret) { s.Data["big"] = make([]byte, 1<<20) },
			"data: Too long: may not be more than 1048576 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base()
			tc.mutate(s)
			before := s.DeepCopy()
			check(t, Secret(s), tc.want)
			if !equalJSON(s, before) {
				t.Error("Secret changed its argument")
			}
		})
	}
}

func TestObjectsNil(t *testing.T) {
	if ConfigMap(nil) == nil || Secret(nil) == nil {
		t.Fatal("nil accepted")
	}
}

// check compares err with the wanted message; "" wants no error.
func check(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("error %v, want none", err)
	case want != "" && err == nil:
		t.Fatalf("accepted, want %q", want)
	case want != "" && err.Error() != want:
		t.Fatalf("error\n  %v\nwant\n  %s", err, want)
	}
}
